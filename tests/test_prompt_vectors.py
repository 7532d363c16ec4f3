"""Prompt vectors written where the text encoder is installed and read where it is not (a lent GPU that
reaches no registry): `prompt-vectors --out F`, then `SPECVIZ_PROMPT_VECTORS=F`."""

import pytest
import torch

from specviz.cli import main
from specviz.models.tiny.text import StoredVectors, shared_text_encoder


def test_stored_vectors_are_the_encoders_and_an_unknown_prompt_is_refused(tmp_path, capsys):
    path = tmp_path / "vectors.safetensors"
    extra = ["--prompt", "a blue car", "--prompt", "red apple"]  # the first shipped example again: kept once
    assert main(["prompt-vectors", "--out", str(path), "--limit", "2", *extra]) == 0
    assert "wrote the vectors of 3 prompts" in capsys.readouterr().out
    stored = StoredVectors(path)
    texts = ["a blue car", "red apple", "a blue car"]
    torch.testing.assert_close(stored(texts), shared_text_encoder()(texts), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="no stored vector for the prompt 'rocket'"):
        stored(["red apple", "rocket"])


def test_the_vectors_file_is_refused_where_it_cannot_be_written(tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["prompt-vectors", "--out", str(blocked / "vectors.safetensors")]) == 2
    assert capsys.readouterr().err.startswith("error:")
