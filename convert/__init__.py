"""The offline converter: `python convert/add_profile.py model.gguf` (see add_profile.py)."""
