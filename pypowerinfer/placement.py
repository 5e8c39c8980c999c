"""Which FFN neurons a device budget holds (the native planner, placement.c), and its table.

    python -m pypowerinfer.placement MODEL.gguf 25%|50%|BYTES|auto ...

"auto" is the free memory of CUDA device 0 (through cuda-python) less a reserve.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

AUTO_RESERVE = 512 << 20  # left free for the CUDA context, the KV cache and scratch


@dataclass(frozen=True)
class LayerPlacement:
    n_hot: int           # positions [0, n_hot) of the layer's frequency order live on the device
    bytes: int
    coverage: float      # share of the layer's profiled activations those neurons serve
    fixed_on_device: bool  # the layer's attention (a parallel block's stays on the CPU) and predictor fit first


@dataclass(frozen=True)
class Placement:
    budget: int
    fixed_bytes: int
    neuron_bytes: int
    output_on_device: bool
    n_ff: int
    layers: list[LayerPlacement]

    @property
    def hot_neurons(self) -> int:
        return sum(x.n_hot for x in self.layers)

    def table(self) -> str:
        mib = 1 << 20
        lines = [f"device budget {self.budget / mib:.1f} MiB: output matrix {'on' if self.output_on_device else 'off'} "
                 f"the device, fixed {self.fixed_bytes / mib:.1f} MiB, neurons {self.neuron_bytes / mib:.1f} MiB",
                 f"{'layer':>5} {'attn':>5} {'hot':>6} {'of':>6} {'MiB':>8} {'covers':>7}"]
        for i, x in enumerate(self.layers):
            lines.append(f"{i:>5} {'dev' if x.fixed_on_device else 'cpu':>5} {x.n_hot:>6} {self.n_ff:>6} "
                         f"{x.bytes / mib:>8.2f} {100 * x.coverage:>6.1f}%")
        return "\n".join(lines)


def cuda_free_bytes() -> int:
    """Free memory of CUDA device 0, or 0 without cuda-python, a driver or a device."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.8
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python
        except ImportError:
            return 0
    try:
        err, free, _total = cudart.cudaMemGetInfo()
    except Exception:  # no driver, no device
        return 0
    return int(free) if int(err) == 0 else 0


def parse_budget(value, model_bytes: int) -> int:
    """BYTES (int or "123", "1.5G", "800M"), "N%" of model_bytes, or "auto" -> bytes."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("vram_budget must be >= 0")
        return int(value)
    text = str(value).strip().lower()
    if text == "auto":
        return max(0, cuda_free_bytes() - AUTO_RESERVE)
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100.0
            if not 0.0 <= share <= 1.0:
                raise ValueError
            return int(share * model_bytes)
        scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
        number = float(text[:-1] if scale != 1 else text)
        if number < 0:
            raise ValueError
        return int(number * scale)
    except ValueError:
        raise ValueError(f"vram_budget must be bytes, a size like '2G', a share like '25%' or 'auto', "
                         f"not {value!r}") from None


def main(argv=None) -> int:
    import argparse

    from .model import NativeModel

    ap = argparse.ArgumentParser(description="Print the placement of device budgets for a profiled model")
    ap.add_argument("model")
    ap.add_argument("budgets", nargs="+", help="bytes, 2G, 25%% of the model's bytes, or auto")
    args = ap.parse_args(argv)
    model = NativeModel(args.model)
    try:
        for b in args.budgets:
            print(model.plan(parse_budget(b, model.device_bytes())).table())
    finally:
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
