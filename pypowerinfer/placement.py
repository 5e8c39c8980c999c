"""Device policy: what a device budget is, which device runs the hot/cold split or layer
offload, and the context Llama opens with them; and the placement table of budgets:

    python -m pypowerinfer.placement MODEL.gguf 25%|50%|BYTES|auto ...

"auto" is the free memory of CUDA device 0 (through cuda-python) less a reserve.
"""
from __future__ import annotations

import sys
import warnings
from typing import Optional, Tuple

from ._ffi import UnsupportedError
from ._logger import log_info
from .model import Device, LayerPlacement, NativeContext, NativeModel, Placement, cuda_device_count

__all__ = ["AUTO_RESERVE", "HYBRID_DEVICES", "LayerPlacement", "Placement", "cuda_free_bytes", "open_context",
           "parse_budget"]

AUTO_RESERVE = 512 << 20  # left free for the CUDA context, the KV cache and scratch
# Llama's hybrid_device, besides "auto" (CUDA when a device exists)
HYBRID_DEVICES = {"none": Device.NONE, "host": Device.HOST, "cuda": Device.CUDA}


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


def open_context(model: NativeModel, options: dict, *, n_gpu_layers: int, vram_budget,
                 hybrid_device: str) -> Tuple[NativeContext, Optional[Placement]]:
    """Llama's context for its options (NativeContext's keywords, less the device ones) and its
    device arguments, and the placement when vram_budget places neurons (its table logged, _logger.py)."""
    split, placement = _split(model, vram_budget, hybrid_device)
    try:
        return _offload(model, {**options, **split}, n_gpu_layers, hybrid_device), placement
    except UnsupportedError as e:
        if hybrid_device != "auto" or not split:
            raise
        # "auto" chose CUDA, which cannot take this model's split (an MoE model's experts): as
        # without a device, the CPU runs it all
        warnings.warn(f"vram_budget: {e}; every FFN runs on the CPU", stacklevel=3)
        return _offload(model, options, n_gpu_layers, hybrid_device), None


def _split(model: NativeModel, vram_budget, hybrid_device: str) -> Tuple[dict, Optional[Placement]]:
    """NativeContext's device and vram_budget for the hot/cold split, and its placement."""
    if hybrid_device != "auto" and hybrid_device not in HYBRID_DEVICES:
        raise ValueError(f"hybrid_device must be 'auto', 'cuda', 'host' or 'none', not {hybrid_device!r}")
    if vram_budget in (None, 0):
        return {}, None
    budget = parse_budget(vram_budget, model.device_bytes())
    device = hybrid_device
    if device == "auto":
        device = "cuda" if cuda_device_count() > 0 else "none"
        if device == "none":
            warnings.warn("vram_budget: no CUDA device, so every neuron runs on the CPU", stacklevel=4)
            return {}, None
    placement = model.plan(budget)
    log_info(placement.table())
    return {"device": HYBRID_DEVICES[device], "vram_budget": budget}, placement


def _offload(model: NativeModel, options: dict, n_gpu_layers: int, hybrid_device: str) -> NativeContext:
    """The context, with layer offload when n_gpu_layers asks for it and a CUDA device exists (or
    hybrid_device="host" asks for the stand-in device). Without one n_gpu_layers is ignored, as
    llama-cpp-python's CPU build ignores it; a model whose layers the device cannot run falls
    back to the CPU with a warning."""
    if hybrid_device == "host" and n_gpu_layers:
        options = {**options, "device": Device.HOST}
    elif n_gpu_layers == 0 or cuda_device_count() == 0:
        if n_gpu_layers:
            log_info("pypowerinfer: n_gpu_layers ignored: no CUDA device")
        return NativeContext(model, **options)
    if options.get("vram_budget"):
        raise ValueError("n_gpu_layers (layer offload) and vram_budget (the hybrid split) both use the device: "
                         "choose one")
    try:
        return NativeContext(model, n_gpu_layers=n_gpu_layers, **options)
    except UnsupportedError as e:
        warnings.warn(f"n_gpu_layers: {e}; every layer runs on the CPU", stacklevel=4)
        return NativeContext(model, **{k: v for k, v in options.items() if k != "device"})


def main(argv=None) -> int:
    import argparse

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
