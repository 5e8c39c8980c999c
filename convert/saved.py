"""A profile saved beside the output (<stem>.profile.npz), for --reuse-profile: re-train,
re-choose and re-decide without the forward passes.

The file holds the Profile's arrays and numbers, the calibration corpus's name and a key of the
input model: its size and the sha256 of its first KEY_BYTES bytes (the GGUF header, i.e. every
key and tensor description, and the start of the weights). A profile whose key differs from the
input's is refused.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path

import numpy as np

from convert import profile as prof
from convert.write import ConvertError, Staging

KEY_BYTES = 16 << 20
_ARRAYS = ("ffn_in", "act_abs", "kth", "mean_abs_act", "nonzero_share")


def model_key(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(KEY_BYTES))
    return f"{path.stat().st_size}:{h.hexdigest()}"


def save(path: Path, p: prof.Profile, corpus_name: str, src: Path) -> None:
    scalars = {f.name: getattr(p, f.name) for f in fields(p)
               if f.name not in _ARRAYS and f.name not in ("val_chunks", "_freq")}
    meta = {"model_key": model_key(src), "model": src.name, "corpus": corpus_name, **scalars}
    arrays = {name: getattr(p, name) for name in _ARRAYS}
    arrays["val_chunks"] = np.stack(p.val_chunks)

    def fill(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    with Staging(path) as st:
        st.commit(st.write(fill))


def load(path: Path, src: Path) -> tuple[str, prof.Profile]:
    """(corpus name, Profile) saved at `path` for the model `src`; ConvertError if there is none
    or it is another model's."""
    if not path.is_file():
        raise ConvertError(f"--reuse-profile: no saved profile {path} (a conversion with --save-profile "
                           "writes it)")
    try:
        with np.load(path) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            arrays = {name: z[name] for name in _ARRAYS}
            val = z["val_chunks"]
    except (OSError, ValueError, KeyError) as e:
        raise ConvertError(f"--reuse-profile: {path} is not a readable saved profile: {e}") from e
    if meta.get("model_key") != model_key(src):
        raise ConvertError(f"--reuse-profile: {path} is the profile of another model ({meta.get('model')!r}, not "
                           f"this {src.name}); convert without --reuse-profile")
    corpus_name = meta.pop("corpus")
    for k in ("model_key", "model"):
        meta.pop(k)
    return corpus_name, prof.Profile(**meta, **arrays, val_chunks=list(val))
