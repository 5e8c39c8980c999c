"""llama_cpp.llama_chat_format: pypowerinfer's chat formats under llama-cpp-python's names."""
from pypowerinfer.chat import FORMATS, ChatPrompt, TemplateFormat, hf_tokenizer_config_to_chat_formatter  # noqa: F401

ChatFormatterResponse = ChatPrompt

format_chatml = FORMATS["chatml"]
format_qwen = FORMATS["qwen"]
format_zephyr = FORMATS["zephyr"]
format_llama2 = FORMATS["llama-2"]
format_llama3 = FORMATS["llama-3"]
format_mistral_instruct = FORMATS["mistral-instruct"]
format_gemma = FORMATS["gemma"]
format_alpaca = FORMATS["alpaca"]
format = FORMATS["vicuna"]  # llama-cpp-python's name for vicuna's formatter


class Jinja2ChatFormatter(TemplateFormat):
    """llama-cpp-python's signature: (template, eos_token, bos_token, add_generation_prompt, stop_token_ids)."""

    def __init__(self, template, eos_token, bos_token, add_generation_prompt=True, stop_token_ids=None):
        super().__init__(template, bos_token=bos_token, eos_token=eos_token, eos_id=None,
                         add_generation_prompt=add_generation_prompt)
        self.stop_token_ids = list(stop_token_ids or [])

    def __call__(self, *, messages, **kwargs):
        out = super().__call__(messages, **kwargs)
        out.stop_token_ids = tuple(self.stop_token_ids)
        return out
