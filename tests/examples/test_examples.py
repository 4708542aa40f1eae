"""The training scripts in examples/ run end to end at a tiny size, as a user runs them.

Each script runs in a fresh process with warnings as errors and must print its progress
lines. The CNN's checkpoint is resumed: a run stopped after epoch 1 and resumed for epoch 2
prints what an uninterrupted two-epoch run prints.
"""
from __future__ import annotations

import re

import kiln
from example_scripts import EXAMPLES, load_example, run_example

FLOAT = r"\d+\.\d{4}"


def test_char_gpt_trains_then_samples_with_topk_and_multinomial():
    out = run_example("char_gpt", "--steps", "3", "--d-model", "16", "--heads", "2", "--layers", "1",
                      "--block-size", "16", "--batch-size", "4", "--sample-chars", "25").stdout
    lines = out.splitlines()
    assert re.fullmatch(rf"step    0  train loss {FLOAT}", lines[0]), out
    assert re.fullmatch(rf"step    2  train loss {FLOAT}", lines[1]), out
    assert re.fullmatch(rf"val loss {FLOAT}", lines[2]), out
    assert lines[3] == "sample:", out
    sample = out.split("sample:\n", 1)[1][:-1]          # the print's own newline ends it
    chars = set((EXAMPLES / "data" / "tiny_text.txt").read_text())
    assert len(sample) == 26 and sample[0] == "\n" and set(sample) <= chars, repr(sample)


def test_char_gpt_sampling_keeps_only_the_top_k_characters():
    gpt = load_example("char_gpt")
    kiln.manual_seed(0)
    model = gpt.CharGPT(vocab_size=12, block_size=8, d_model=16, n_head=2, n_layer=1, dropout=0.0).eval()
    start = kiln.tensor([[3, 1]])
    with kiln.no_grad():
        allowed = kiln.topk(model(start)[0, -1], 2).indices.tolist()
    for seed in range(8):
        kiln.manual_seed(seed)
        out = gpt.generate(model, start, new_chars=1, top_k=2)
        assert out.shape == (1, 3) and out[0, :2].tolist() == [3, 1] and out[0, 2].item() in allowed
    kiln.manual_seed(5)
    first = gpt.generate(model, start, new_chars=12, top_k=3).tolist()
    kiln.manual_seed(5)
    assert gpt.generate(model, start, new_chars=12, top_k=3).tolist() == first   # reproducible per seed
    assert len(first[0]) == 14                             # longer than block_size: the context is cropped


def test_char_gpt_cached_sampling_equals_rerunning_the_whole_text():
    gpt = load_example("char_gpt")
    kiln.manual_seed(0)
    model = gpt.CharGPT(vocab_size=12, block_size=16, d_model=16, n_head=2, n_layer=2, dropout=0.0).eval()
    start = kiln.tensor([[3, 1, 4], [1, 5, 9]])
    want = start
    with kiln.no_grad():
        for _ in range(12):  # top_k=1: the likeliest token, from the whole text each time
            want = kiln.cat([want, model(want)[:, -1].argmax(-1, keepdim=True)], 1)
    assert gpt.generate(model, start, new_chars=12, top_k=1).tolist() == want.tolist()
    step = kiln.compile(lambda idx, pos, caches: gpt.cached_forward(model, idx, pos, caches))
    assert gpt.generate(model, start, new_chars=12, top_k=1, step=step).tolist() == want.tolist()
    assert step.stats.traces == 2  # the prompt, then one plan for every later position
    kiln.manual_seed(3)
    drawn = gpt.generate(model, start, new_chars=12, top_k=4).tolist()
    kiln.manual_seed(3)
    assert gpt.generate(model, start, new_chars=12, top_k=4, step=step).tolist() == drawn


def test_lstm_lm_trains_and_reports_perplexity():
    out = run_example("lstm_lm", "--epochs", "2", "--hidden", "16", "--layers", "2", "--seq-len", "8",
                      "--batch-size", "4").stdout
    lines = out.splitlines()
    assert len(lines) == 2, out
    for epoch, line in enumerate(lines, start=1):
        match = re.fullmatch(rf"epoch {epoch}  train loss ({FLOAT})  val loss ({FLOAT})  val ppl (\d+\.\d\d)", line)
        assert match, out
        val_loss, ppl = float(match[2]), float(match[3])
        assert abs(ppl - 2.718281828 ** val_loss) <= 0.01 * ppl, line


def test_lstm_lm_says_when_the_streams_are_too_short():
    proc = run_example("lstm_lm", "--batch-size", "1000", "--seq-len", "8", check=False)
    assert proc.returncode == 2 and "too short for --seq-len 8" in proc.stderr, proc.stderr


def test_cnn_digits_checkpoint_resumes_where_it_stopped(tmp_path):
    tiny = ["--limit", "256", "--batch-size", "32"]
    straight = run_example("cnn_digits", "--epochs", "2", "--checkpoint", str(tmp_path / "straight.safetensors"),
                           *tiny, cwd=tmp_path).stdout.splitlines()
    assert re.fullmatch(rf"epoch 1  train loss {FLOAT}  val accuracy \d+\.\d%", straight[0]), straight
    assert straight[1].startswith("epoch 2  train loss ") and straight[2].startswith("test accuracy "), straight

    ckpt = str(tmp_path / "ckpt.safetensors")
    first = run_example("cnn_digits", "--epochs", "1", "--checkpoint", ckpt, *tiny, cwd=tmp_path).stdout.splitlines()
    assert first[0] == straight[0]
    saved = kiln.load(ckpt)
    assert saved["epoch"] == 1 and set(saved) == {"model", "optimizer", "rng", "epoch"}
    assert saved["optimizer"]["state"], "the momentum buffers are in the checkpoint"

    resumed = run_example("cnn_digits", "--epochs", "2", "--resume", "--checkpoint", ckpt, *tiny,
                          cwd=tmp_path).stdout.splitlines()
    assert resumed[0] == f"resumed from {ckpt} after epoch 1"
    assert resumed[1:] == straight[1:], (resumed, straight)  # epoch 2 and the test accuracy, as uninterrupted
    assert kiln.load(ckpt)["epoch"] == 2


def test_cnn_digits_resume_without_a_checkpoint_is_a_clear_error(tmp_path):
    proc = run_example("cnn_digits", "--resume", "--checkpoint", str(tmp_path / "missing.safetensors"),
                       check=False, cwd=tmp_path)
    assert proc.returncode == 2 and "no checkpoint at" in proc.stderr and "without --resume" in proc.stderr


def test_every_example_has_a_docstring_and_fits_on_a_screen():
    for path in sorted(EXAMPLES.glob("*.py")):
        text = path.read_text()
        assert text.startswith('"""') and f"python examples/{path.name}" in text, path.name
        # (two screens at most: char_gpt, with its key/value cache, is the longest)
        assert len(text.splitlines()) <= 140, f"{path.name} has {len(text.splitlines())} lines"
        assert 'if __name__ == "__main__":' in text, path.name
