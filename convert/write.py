"""Step 5, write: the input GGUF's keys and tensors unchanged, plus the profile's, via GGUFWriter.

Files are never written in place: `Staging` hands out temporary files in the output's folder
(`<out>.pid<PID>.<random>.tmp`, one per candidate setting); the chosen one is renamed onto the
final path once complete and fsync'ed, and every other one is removed on any exit: normal,
exception, Ctrl-C or SIGTERM. A SIGKILL can leave
the temporary file behind (never a half-written final file); the next run removes it when the
process that made it is gone.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

log = logging.getLogger("convert.write")

KEY_PREFIX = "powerinfer."
# tensors this converter adds; a file with any of them (or a powerinfer.* key) is already profiled
ADDED_TENSORS = ("ffn_freq", "fc1.weight", "fc2.weight", "ffn_down_t.weight", "ffn_exp_freq", "ffn_exp_run_freq")
_ADDED = re.compile(r"^blk\.\d+\.(" + "|".join(re.escape(t) for t in ADDED_TENSORS) + r")$")
# types gguf.quants can quantize in numpy (K-quants it can only dequantize)
_QUANTIZABLE = {GGMLQuantizationType[n] for n in ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")}


class ConvertError(Exception):
    """A clear, user-facing reason the conversion cannot go on."""


@dataclass
class NewTensor:
    name: str
    data: np.ndarray              # numpy order; uint8 block bytes for quantized types
    qtype: GGMLQuantizationType


# --- reading ----------------------------------------------------------------------

def open_gguf(path: str | os.PathLike) -> GGUFReader:
    """GGUFReader, with clear errors for a missing, non-GGUF or PowerInfer-magic file."""
    path = Path(path)
    if not path.is_file():
        raise ConvertError(f"{path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PWRI":
        raise ConvertError(f"{path}: a PowerInfer 'PWRI' file (already converted by PowerInfer); "
                           "give the original GGUF model instead")
    if magic != b"GGUF":
        raise ConvertError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        return GGUFReader(path)
    except Exception as e:  # gguf-py raises ValueError/struct.error/IndexError on damage
        raise ConvertError(f"{path}: not a readable GGUF file: {e}") from e


def profiled_markers(reader: GGUFReader) -> list[str]:
    """Keys and tensors that show a previous profile (empty for a plain model)."""
    keys = [k for k in reader.fields if k.startswith(KEY_PREFIX)]
    tensors = [t.name for t in reader.tensors if _ADDED.match(t.name)]
    return keys + tensors


def tensor(reader: GGUFReader, name: str):
    for t in reader.tensors:
        if t.name == name:
            return t
    raise ConvertError(f"the model has no tensor {name!r}")


def _field_value(field) -> tuple[object, GGUFValueType, GGUFValueType | None]:
    """(value, type, array item type) of a reader field, strings kept as raw bytes."""
    vtype = GGUFValueType(field.types[0])
    if vtype == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]), vtype, None
    if vtype != GGUFValueType.ARRAY:
        return field.parts[field.data[0]][0], vtype, None
    sub = GGUFValueType(field.types[1])
    if sub == GGUFValueType.ARRAY:
        raise ConvertError(f"key {field.name!r} is an array of arrays, which this converter cannot copy")
    if sub == GGUFValueType.STRING:
        return [bytes(field.parts[i]) for i in field.data], vtype, sub
    return [field.parts[i][0] for i in field.data], vtype, sub


# --- the transposed down matrix ---------------------------------------------------------

# 4- and 5-bit block types: requantizing their transposed values in the same type adds a second
# rounding as large as the first. Measured on SmolLM2-135M Q4_1 (held-out ppl, every row kept):
# ffn_down_t in Q4_1 +7.6%, Q5_1 +6.5%, Q8_0 +0.7% (rows of the rare huge activations amplify it).
# The K-quants go to Q8_0 too: gguf-py cannot write them, and Q8_0 is half F16's bytes.
# That rule gives the type the candidates are searched with; the converter then tries the
# smaller DOWN_T_TRIALS on the winner and keeps the smallest whose measured cost fits the budget.
LOSSY_REQUANT = {GGMLQuantizationType[n]
                 for n in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")}
_FORCED = {"q4_0": GGMLQuantizationType.Q4_0, "q5_0": GGMLQuantizationType.Q5_0,
           "q8_0": GGMLQuantizationType.Q8_0, "f16": GGMLQuantizationType.F16}
DOWN_T_TYPES = ("auto", "same", *_FORCED)
# smallest first; K-quants (Q4_K, Q6_K) would belong here where n_embd % 256 == 0, but gguf-py
# has no numpy quantizer for them
DOWN_T_TRIALS = (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q8_0)


def down_t_type(down_type: GGMLQuantizationType, n_embd: int, choice: str = "auto") -> GGMLQuantizationType:
    """The type of ffn_down_t, whose rows are n_embd long, before any trial:
    auto: Q8_0 for a 4/5-bit or K-quant ffn_down (see LOSSY_REQUANT), else ffn_down's own type;
    same: ffn_down's type (PowerInfer's and the issue's rule); q4_0, q5_0, q8_0, f16: that type.
    A block type whose block does not divide n_embd, or that gguf-py cannot quantize
    (K-quants), falls back to F16; F32 stays F32."""
    if choice not in DOWN_T_TYPES:
        raise ConvertError(f"--down-t-type must be one of {', '.join(DOWN_T_TYPES)}")
    qtype = _FORCED.get(choice, down_type)
    if choice == "auto" and down_type in LOSSY_REQUANT:
        qtype = GGMLQuantizationType.Q8_0
    if qtype == GGMLQuantizationType.F32:
        return qtype
    if qtype not in _QUANTIZABLE or n_embd % GGML_QUANT_SIZES[qtype][0]:
        return GGMLQuantizationType.F16
    return qtype


def bytes_per_weight(qtype: GGMLQuantizationType) -> float:
    block, size = GGML_QUANT_SIZES[qtype]
    return size / block


def down_t_trials(search_type: GGMLQuantizationType, n_embd: int) -> list[GGMLQuantizationType]:
    """The DOWN_T_TRIALS smaller than the search type whose blocks divide n_embd, smallest first."""
    return [t for t in DOWN_T_TRIALS
            if n_embd % GGML_QUANT_SIZES[t][0] == 0 and bytes_per_weight(t) < bytes_per_weight(search_type)]


def down_t_float(reader: GGUFReader, layer: int) -> tuple[np.ndarray, GGMLQuantizationType]:
    """ffn_down (numpy (n_embd, n_ff)) transposed to float32 (n_ff, n_embd), and ffn_down's type."""
    down = tensor(reader, f"blk.{layer}.ffn_down.weight")
    w = dequantize(down.data, down.tensor_type).reshape(int(down.shape[1]), int(down.shape[0]))  # (n_embd, n_ff)
    return np.ascontiguousarray(w.T, dtype=np.float32), GGMLQuantizationType(down.tensor_type)


def down_t_tensor(layer: int, wt: np.ndarray, qtype: GGMLQuantizationType) -> NewTensor:
    """blk.N.ffn_down_t.weight: one row per neuron, in `qtype`."""
    return NewTensor(f"blk.{layer}.ffn_down_t.weight", encode_weight(wt, qtype), qtype)


def down_t(reader: GGUFReader, layer: int, choice: str = "auto") -> NewTensor:
    """blk.N.ffn_down_t.weight in the type `down_t_type` picks."""
    wt, down_type = down_t_float(reader, layer)
    return down_t_tensor(layer, wt, down_t_type(down_type, wt.shape[1], choice))


def encode_weight(w: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """Float32 weights in numpy order -> the array GGUFWriter takes for that type."""
    if qtype == GGMLQuantizationType.F32:
        return np.ascontiguousarray(w, dtype=np.float32)
    if qtype == GGMLQuantizationType.F16:
        return np.ascontiguousarray(w, dtype=np.float16)
    return quantize(np.ascontiguousarray(w, dtype=np.float32), qtype)


def decode_weight(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """The float32 weights a reader (or the runtime) sees for encode_weight's output."""
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        return np.asarray(data, dtype=np.float32)
    return dequantize(data, qtype)


# --- writing ------------------------------------------------------------------------

def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(final: Path) -> None:
    """Temp files of `final` left by a killed run (their process is gone)."""
    pattern = re.compile(re.escape(final.name) + r"\.pid(\d+)\.[^.]+\.tmp$")
    with suppress(OSError):
        for p in final.parent.iterdir():
            m = pattern.match(p.name)
            if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
                log.info("removing %s, left by an interrupted run", p)
                with suppress(OSError):
                    p.unlink()


def _folder_error(folder: Path, e: OSError) -> ConvertError:
    if e.errno == errno.ENOSPC:
        return ConvertError(f"no space left on the device of {folder}: free some space or choose another -o folder")
    return ConvertError(f"cannot write to folder {folder}: {e.strerror or e}")


def temp_path(final: Path) -> Path:
    """A new empty temporary file beside `final` (raises ConvertError if the folder is not writable)."""
    folder = final.parent
    if not folder.is_dir():
        raise ConvertError(f"output folder {folder} does not exist")
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f"{final.name}.pid{os.getpid()}.", suffix=".tmp")
    except OSError as e:
        raise _folder_error(folder, e) from e
    os.close(fd)
    os.chmod(name, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets; outputs get the usual mode
    return Path(name)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(final: Path) -> None:
    """Fail now, before minutes of profiling, if the output cannot be written."""
    remove_stale_temps(final)
    temp_path(final).unlink()
    if final.exists() and not os.access(final, os.W_OK):
        # os.replace would still succeed in a writable folder; say what will happen
        log.warning("%s exists and is read-only; it will be replaced", final)


class Staging:
    """Temporary files beside `final`, for candidate outputs: `new()` makes one, `commit(p)`
    renames it onto `final`, and leaving the `with` block removes every other one, whatever
    the exit (exception, KeyboardInterrupt, SystemExit from SIGTERM)."""

    def __init__(self, final: Path):
        self.final = final
        self._paths: set[Path] = set()

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, *exc) -> None:
        for p in self._paths:
            with suppress(FileNotFoundError):
                p.unlink()
        self._paths.clear()

    def new(self) -> Path:
        p = temp_path(self.final)
        self._paths.add(p)
        return p

    def discard(self, p: Path) -> None:
        self._paths.discard(p)
        with suppress(FileNotFoundError):
            p.unlink()

    def commit(self, p: Path) -> None:
        try:
            os.replace(p, self.final)
        except OSError as e:
            raise _folder_error(self.final.parent, e) from e
        self._paths.discard(p)

    def write(self, fn, *args, **kwargs) -> Path:
        """A new temp file filled by fn(path, *args, **kwargs); a full disk or a lost folder
        becomes a ConvertError, and the partial file is removed."""
        p = self.new()
        try:
            fn(p, *args, **kwargs)
        except OSError as e:
            self.discard(p)
            raise _folder_error(self.final.parent, e) from e
        except BaseException:
            self.discard(p)
            raise
        return p


def write_small(final: Path, data: bytes) -> None:
    """A side file (the JSON or PNG report), also through a temp file and a rename."""
    with Staging(final) as st:
        st.commit(st.write(lambda p: p.write_bytes(data)))


def _arch(reader: GGUFReader) -> str:
    field = reader.fields.get("general.architecture")
    if field is None:
        raise ConvertError("the model has no general.architecture key")
    return bytes(field.parts[field.data[0]]).decode()


def write_gguf(path: Path, reader: GGUFReader, new_tensors: list[NewTensor], new_kv: dict,
               drop_profile: bool = False) -> None:
    """Write every key and tensor of `reader` unchanged (same types, same bytes, same order),
    then `new_kv` {key: (value, GGUFValueType[, item type])} and `new_tensors`, to `path`.
    drop_profile: leave out a previous profile's keys and tensors (re-profiling with --force)."""
    writer = GGUFWriter(os.fspath(path), _arch(reader))
    try:
        for name, field in reader.fields.items():
            if name.startswith("GGUF.") or (drop_profile and name.startswith(KEY_PREFIX)):
                continue
            value, vtype, sub = _field_value(field)
            if name == "general.alignment":
                writer.data_alignment = int(value)
            if name == "general.architecture":
                continue  # the writer's own first key, same value
            writer.add_key_value(name, value, vtype, sub_type=sub)
        for key, spec in new_kv.items():
            writer.add_key_value(key, *spec)

        kept = [t for t in reader.tensors if not (drop_profile and _ADDED.match(t.name))]
        for t in kept:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, int(t.n_bytes),
                                   raw_dtype=GGMLQuantizationType(t.tensor_type))
        for nt in new_tensors:
            writer.add_tensor_info(nt.name, nt.data.shape, nt.data.dtype, nt.data.nbytes, raw_dtype=nt.qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in kept:
            writer.write_tensor_data(np.asarray(t.data))
        for nt in new_tensors:
            writer.write_tensor_data(np.ascontiguousarray(nt.data))
            log.debug("added %s %s %s", nt.name, nt.qtype.name, nt.data.shape)
        writer.fout[0].flush()
        os.fsync(writer.fout[0].fileno())
    finally:
        writer.close()
