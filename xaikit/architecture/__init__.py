"""Small reference architectures, one module per framework.

Import the framework you use on purpose: ``xaikit.architecture.torch`` or
``xaikit.architecture.tensorflow`` (importing this package loads neither).
"""

__all__: list[str] = []
