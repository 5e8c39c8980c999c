"""llama_cpp._internals: llama-cpp-python's wrappers of llama.cpp's C objects. Importing it works
(test files and some clients import it at the top); any name raises NotImplementedError naming it."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"llama_cpp._internals.{name}: llama-cpp-python's wrappers of llama.cpp's C objects "
                              f"are not part of pypowerinfer's llama_cpp alias")
