"""The workload of a benchmark run: full (the issue's settings) or quick (a smoke run)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Settings:
    sg_s: int = 16  # SmoothGrad noise samples
    ig_m: int = 50  # IG path steps
    smint_s: int = 8  # SmInt noise samples
    smint_m: int = 50  # SmInt path steps
    ref_b: int = 6  # the reference's own call: get_smoothed_masks(nsamples=6, nintegration=100) on B=6
    ref_s: int = 6
    ref_m: int = 100
    batches: tuple[int, ...] = (16, 64)
    models: tuple[str, ...] = ("lenet", "resnet")
    frameworks: tuple[str, ...] = ("torch", "tf")
    chunks: tuple[int, ...] = (64, 128, 256, 512, 1024)  # bound search
    bound_rows: int = 2048  # rows per bound measurement (at least two chunks)
    xla_chunks: tuple[int, ...] = (256,)  # TF XLA bound line(s)
    reps: int = 3
    pair: bool = True  # PAIR saliency peers
    pair_smoothgrad: bool = True
    smint_loop: bool = True  # sequential loop at the SmInt settings too (not only the reference call)
    unchunked_max_rows: int = 6400  # captum NoiseTunnel(IG) in one pass only up to this many rows
    memory: bool = True
    memory_b: int = 4  # the memory sweep runs on the first model only
    memory_sweep: tuple[tuple[int, int], ...] = ((8, 10), (8, 50), (16, 100))
    quick: bool = False

    @classmethod
    def quick_run(cls) -> Settings:
        """A smoke run (well under a minute on a quiet 2-core CPU): reduced S and M, one model,
        B=6/16, two chunk sizes, no PAIR, no XLA, two timed rounds."""
        return cls(
            sg_s=2,
            ig_m=4,
            smint_s=2,
            smint_m=4,
            ref_s=2,
            ref_m=4,
            batches=(16,),
            models=("lenet",),
            chunks=(128,),  # plus the chunk xaikit chose, always measured
            bound_rows=256,
            xla_chunks=(),
            reps=2,
            pair=False,
            pair_smoothgrad=False,
            smint_loop=False,
            unchunked_max_rows=2048,
            memory_b=4,
            memory_sweep=((2, 4), (2, 8)),
            quick=True,
        )
