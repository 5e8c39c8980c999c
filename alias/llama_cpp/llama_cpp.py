"""llama_cpp.llama_cpp: the constants and small functions of llama-cpp-python's low-level module
that its dependents use (enum values as llama.cpp defines them, GPU and system queries). Its
ctypes bindings of llama.cpp's C API are not here: any other name raises NotImplementedError
naming it, rather than an AttributeError a client might take for an old version."""
import ctypes

from pypowerinfer.model import build_info, cuda_device_count
from pypowerinfer.sampling import LLAMA_DEFAULT_SEED  # noqa: F401

LLAMA_TOKEN_NULL = -1
LLAMA_MAX_DEVICES = 16

# enum llama_vocab_type
LLAMA_VOCAB_TYPE_NONE, LLAMA_VOCAB_TYPE_SPM, LLAMA_VOCAB_TYPE_BPE, LLAMA_VOCAB_TYPE_WPM, LLAMA_VOCAB_TYPE_UGM, \
    LLAMA_VOCAB_TYPE_RWKV = range(6)
# enum llama_rope_type
LLAMA_ROPE_TYPE_NONE, LLAMA_ROPE_TYPE_NORM, LLAMA_ROPE_TYPE_NEOX = -1, 0, 2
# enum llama_rope_scaling_type
LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, LLAMA_ROPE_SCALING_TYPE_NONE, LLAMA_ROPE_SCALING_TYPE_LINEAR, \
    LLAMA_ROPE_SCALING_TYPE_YARN, LLAMA_ROPE_SCALING_TYPE_LONGROPE = range(-1, 4)
LLAMA_ROPE_SCALING_TYPE_MAX_VALUE = LLAMA_ROPE_SCALING_TYPE_LONGROPE
# enum llama_pooling_type
LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN, LLAMA_POOLING_TYPE_CLS, \
    LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_RANK = range(-1, 5)
# enum llama_attention_type
LLAMA_ATTENTION_TYPE_UNSPECIFIED, LLAMA_ATTENTION_TYPE_CAUSAL, LLAMA_ATTENTION_TYPE_NON_CAUSAL = range(-1, 2)
# enum llama_split_mode
LLAMA_SPLIT_MODE_NONE, LLAMA_SPLIT_MODE_LAYER, LLAMA_SPLIT_MODE_ROW = range(3)

# enum ggml_type: the ids type_k / type_v and GGUF files use
GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1 = 0, 1, 2, 3
GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1 = 6, 7, 8, 9
GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_K = range(10, 16)
GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ1_S, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ3_S, \
    GGML_TYPE_IQ2_S, GGML_TYPE_IQ4_XS = range(16, 24)
GGML_TYPE_I8, GGML_TYPE_I16, GGML_TYPE_I32, GGML_TYPE_I64, GGML_TYPE_F64, GGML_TYPE_IQ1_M, GGML_TYPE_BF16 = \
    range(24, 31)

# enum llama_ftype: the file types a GGUF's general.file_type names (the common ones)
LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16, LLAMA_FTYPE_MOSTLY_Q4_0, LLAMA_FTYPE_MOSTLY_Q4_1 = 0, 1, 2, 3
LLAMA_FTYPE_MOSTLY_Q8_0, LLAMA_FTYPE_MOSTLY_Q5_0, LLAMA_FTYPE_MOSTLY_Q5_1 = 7, 8, 9
LLAMA_FTYPE_MOSTLY_Q2_K, LLAMA_FTYPE_MOSTLY_Q3_K_S, LLAMA_FTYPE_MOSTLY_Q3_K_M, LLAMA_FTYPE_MOSTLY_Q3_K_L, \
    LLAMA_FTYPE_MOSTLY_Q4_K_S, LLAMA_FTYPE_MOSTLY_Q4_K_M, LLAMA_FTYPE_MOSTLY_Q5_K_S, LLAMA_FTYPE_MOSTLY_Q5_K_M, \
    LLAMA_FTYPE_MOSTLY_Q6_K = range(10, 19)
LLAMA_FTYPE_MOSTLY_BF16 = 32
LLAMA_FTYPE_GUESSED = 1024


def llama_supports_gpu_offload() -> bool:
    return cuda_device_count() > 0


def llama_supports_mmap() -> bool:
    return True  # the weights are always mapped


def llama_supports_mlock() -> bool:
    return False  # use_mlock is accepted and ignored


def llama_max_devices() -> int:
    return LLAMA_MAX_DEVICES


def llama_backend_init() -> None:
    """Nothing to set up: the library initialises on first use."""


def llama_backend_free() -> None:
    """Nothing to free: contexts and models free themselves."""


def llama_print_system_info() -> bytes:
    """What this build runs on, as bytes (the peer returns llama.cpp's C string)."""
    return f"pypowerinfer: {build_info()} | CUDA devices = {cuda_device_count()}".encode()


def llama_model_get_vocab(model):
    """The vocabulary of `Llama.model`'s handle."""
    return model.vocab


def llama_token_to_piece(vocab, token: int, buf, length: int, lstrip: int, special: bool) -> int:
    """The text of `token` into the ctypes char buffer `buf` of `length` bytes, as llama.cpp: its
    length, or minus the length needed when it does not fit (nothing written); up to `lstrip`
    leading spaces removed; special tokens rendered only with `special`."""
    piece = vocab.token_to_piece(int(token), special=bool(special))
    for _ in range(max(0, int(lstrip))):
        if not piece.startswith(b" "):
            break
        piece = piece[1:]
    if len(piece) > length:
        return -len(piece)
    ctypes.memmove(buf, piece, len(piece))
    return len(piece)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"llama_cpp.llama_cpp.{name}: llama.cpp's low-level C API is not part of "
                              f"pypowerinfer's llama_cpp alias")


__all__ = [name for name in dir() if name.isupper() or name.startswith("llama_")]
