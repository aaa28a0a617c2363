"""Builds the toy model's tokenizer: a byte-level BPE (the same kind of
tokenizer.json as Qwen3's: NFC, Qwen3's split regex, byte-level
alphabet, merges, the chat template's added tokens) with merges learned
on the toy domain's rendered conversations.

With merges, a toy conversation is about a quarter as many tokens as with
bare bytes (tests/fixtures/byte-tokenizer), so rollouts, training and the
warm start all cost about a quarter as much, and a command the agent
writes is a few dozen tokens instead of ~80 bytes sampled one by one.
Digits stay single tokens (the split regex isolates each one).

    python make_tokenizer.py SFT.jsonl OUT_DIR [--vocab N]

SFT.jsonl is `lisa-toygen --sft` output; OUT_DIR gets tokenizer.json and
tokenizer_config.json. Needs the PyPI packages `tokenizers` and
`transformers` (the chat template is rendered by transformers, exactly
as lisa's renderer does it); lisa itself needs neither.
"""
import argparse
import json
import os
import shutil

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
BYTE_TOK = os.path.join(HERE, "..", "..", "tests", "fixtures",
                        "byte-tokenizer")
# Qwen3's split regex (tests/fixtures/qwen3-tokenizer/tokenizer.json).
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def added_tokens():
    """The byte tokenizer's added tokens, in its order and with its flags."""
    with open(os.path.join(BYTE_TOK, "tokenizer.json")) as f:
        return json.load(f)["added_tokens"]


def rendered(sft_path):
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast.from_pretrained(BYTE_TOK)
    with open(sft_path) as f:
        for line in f:
            conv = json.loads(line)
            for m in conv["messages"]:  # lisa renders a null content as ""
                if m.get("content") is None:
                    m["content"] = ""
            yield tok.apply_chat_template(conv["messages"],
                                          tools=conv["tools"],
                                          tokenize=False)


def pieces(texts, specials):
    """The texts cut at the added tokens, which BPE never sees."""
    for text in texts:
        parts = [text]
        for s in specials:
            parts = [q for p in parts for q in p.split(s)]
        yield from (p for p in parts if p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sft")
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=1024,
                    help="BPE vocabulary (bytes + merges), added tokens "
                    "come after it")
    a = ap.parse_args()
    extra = added_tokens()
    specials = [t["content"] for t in extra]

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False,
                                     use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=a.vocab, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = list(rendered(a.sft))
    tok.train_from_iterator(pieces(texts, specials), trainer=trainer)
    assert tok.get_vocab_size() <= a.vocab
    tok.add_tokens([AddedToken(t["content"], single_word=t["single_word"],
                               lstrip=t["lstrip"], rstrip=t["rstrip"],
                               normalized=t["normalized"],
                               special=t["special"]) for t in extra])
    os.makedirs(a.out, exist_ok=True)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    shutil.copy(os.path.join(BYTE_TOK, "tokenizer_config.json"), a.out)

    n_bytes = sum(len(t.encode()) for t in texts)
    n_toks = sum(len(tok.encode(t).ids) for t in texts)
    print(f"tokenizer: {tok.get_vocab_size()} tokens "
          f"({tok.get_vocab_size() - len(extra)} BPE + {len(extra)} added); "
          f"{n_bytes / len(texts):.0f} bytes -> {n_toks / len(texts):.0f} "
          f"tokens per conversation")


if __name__ == "__main__":
    main()
