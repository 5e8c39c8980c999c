# Sourced by the client checks (scripts/*_check.sh): make_alias_venv VENV PACKAGE... builds a fresh
# venv with the packages, pypowerinfer and the llama_cpp alias (alias/), and without
# llama-cpp-python, which owns the same package name and which clients' plugins pull in; then
# checks that `llama_cpp` there is the alias.
make_alias_venv() {
    local venv=$1
    shift
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$@" . ./alias
    "$venv/bin/pip" uninstall -y -q llama-cpp-python 2>/dev/null || true
    "$venv/bin/pip" install -q --force-reinstall --no-deps ./alias  # llama-cpp-python's uninstall took llama_cpp/
    (cd "$venv" && "$venv/bin/python" -c \
        "import llama_cpp, pypowerinfer; assert llama_cpp.Llama is pypowerinfer.Llama, llama_cpp.__file__")
}
