"""A tiny Qwen3, built offline in seconds, for tests and examples.

A byte-level BPE tokenizer trained on local text (a part of Python's standard library and the prompts' wording), Qwen3's special tokens
(``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``<tool_call>``, ``<tool_response>``, ...) and a Qwen3-style chat
template with tool support, plus a ``Qwen3ForCausalLM`` of a few hundred thousand parameters. Nothing is
downloaded. The same code paths as a real Qwen3 checkpoint run on it (chat template, generation, training).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<answer>", "</answer>",
]  # fmt: skip

# Qwen3's chat template, reduced to what aworld-gym uses: a system turn (with <tools> when tools are given),
# user/assistant turns, tool results as <tool_response> blocks in a user turn, and the generation prompt.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] }}"
    "{%- if tools %}{{- '\\n\\n# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}"
    "{%- endfor %}{{- '\\n</tools>' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- set rest = messages[1:] %}"
    "{%- else %}{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n\\n<tools>' }}{%- for tool in tools %}"
    "{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- set rest = messages %}{%- endif %}"
    "{%- for m in rest %}"
    "{%- if m['role'] == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif m['role'] == 'assistant' %}{{- '<|im_start|>assistant\\n' + (m['content'] or '') }}"
    "{%- for call in (m.get('tool_calls') or []) %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": '"
    " + (call['function']['arguments'] if call['function']['arguments'] is string"
    " else (call['function']['arguments'] | tojson)) + '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


# The wording the bundled envs' prompts use, written out once here: the tokenizer must not change when the
# package's sources or README do (it once was trained on them, and every README edit changed how fast the test
# models learned).
PROMPT_WORDS = """You are a helpful assistant that solves the user's task step by step using the tools provided.
# Tools
You may call one or more functions to assist with the user query.
You are provided with function signatures within <tools></tools> XML tags.
For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML
tags. When you know the final answer, reply with it inside <answer></answer> tags, e.g. <answer>42</answer>. Your
answer ends the task. Call a tool with <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>, or give your
final answer as <answer>...</answer>. Format error: no tool call and no final answer. Your final answer was
recorded. The task is over. What is 12 + 1? Use the calculator: add, subtract, multiply, divide, the sum of two
numbers a and b. Complete the Python function below; run your code with run_python and submit the whole function.
def solution(numbers: list[int]) -> int: return sum(numbers). The tests passed. Traceback (most recent call last):
Error: the tool failed, the server died, a timeout. Read the file, search the web, open the page and click the
button, type the text, select the option, submit the form. The page now shows the task at the top.
"""

SNIPPETS = [
    '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call>',
    "<tool_response>\n3.0\n</tool_response>",
    "user\n<tool_response>\n12\n</tool_response>\nassistant\n",
    "<answer>42</answer> The answer is 0 1 2 3 4 5 6 7 8 9.",
    '{"type": "function", "function": {"name": "add", "description": "Add a and b.", "parameters": {"properties": '
    '{"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "type": "object"}}}',
    "Solve the task with the tools. What is the product of 3 and 4? Multiply 3 by 4. What is 3 times 4? What is "
    "the sum of 3 and 4? Add 3 and 4. What do 3 and 4 make together?",
]

# Python's own modules: code and English docstrings, fixed for a given Python version.
STDLIB_CORPUS = ("asyncio", "json", "argparse.py", "dataclasses.py", "textwrap.py", "string.py", "statistics.py",
                 "fractions.py", "functools.py", "inspect.py", "typing.py", "pathlib.py")  # fmt: skip


def _corpus() -> list[str]:
    """Text to train the tokenizer on: a part of Python's standard library, the prompts' wording, format snippets.
    Independent of this package's sources and docs."""
    stdlib = Path(json.__file__).resolve().parents[1]
    files: list[Path] = []
    for name in STDLIB_CORPUS:
        path = stdlib / name
        files += sorted(path.glob("*.py")) if path.is_dir() else [path]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files if p.is_file()]
    return texts + [PROMPT_WORDS] * 20 + SNIPPETS * 50


def build_tokenizer(vocab_size: int = 1024) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on local text, with Qwen3's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer: Any, hidden_size: int = 96, layers: int = 2, seed: int = 0) -> Any:
    """A randomly initialised ``Qwen3ForCausalLM`` sized for the tokenizer (a few hundred thousand parameters)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    return Qwen3ForCausalLM(config)


def build_tiny_qwen3(path: str | Path, vocab_size: int = 1024, hidden_size: int = 96, layers: int = 2) -> Path:
    """Build (or reuse) a tiny Qwen3 checkpoint folder at ``path``: tokenizer, chat template, model."""
    out = Path(path)
    marker = out / "aworld_tiny_qwen3.json"
    spec = {"vocab_size": vocab_size, "hidden_size": hidden_size, "layers": layers, "version": 2}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return out
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    model = build_model(tokenizer, hidden_size, layers)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    marker.write_text(json.dumps(spec))
    return out
