"""Token-in/token-out backends of the endpoint: prompt ids in, the sampled ids with their logprobs out.

A backend is anything with ``generate(prompt_ids, params) -> Generated`` (called from a worker thread, one call at a
time per backend unless it says ``concurrent = True``) and a ``weights_version`` (``None`` when unknown).
:class:`HFBackend` samples with a transformers causal LM in-process (CPU tests, small models).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Sampling:
    """What a request asks of the sampler."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass(frozen=True)
class Generated:
    """One generation: the completion ids as sampled (the end-of-turn token included when it was sampled), the
    logprob of each under the sampling distribution, and why it stopped (``"stop"``: the end-of-turn token;
    ``"length"``: ``max_tokens``)."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str


class Backend(Protocol):
    weights_version: int | None

    def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generated: ...


class HFBackend:
    """Sampling with a transformers causal LM, in this process.

    Args:
        model: a model folder (loaded with its tokenizer) or a loaded model.
        tokenizer: the tokenizer, when ``model`` is a loaded model.
        weights_version: what the records say the weights are (``load_weights`` counts up from it).
    """

    concurrent = False

    def __init__(self, model: str | Path | Any, tokenizer: Any = None, weights_version: int | None = 0) -> None:
        if isinstance(model, str | Path):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("HFBackend needs the tokenizer of a loaded model")
        self.model, self.tokenizer = model, tokenizer
        self.model.eval()
        self.weights_version = weights_version
        self._lock = threading.Lock()  # one generation at a time: the model is shared

    @property
    def context(self) -> int | None:
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if isinstance(n, int) else None

    def load_weights(self, state_dict: dict[str, Any], version: int | None = None) -> None:
        """New weights (a trainer's step): the next calls are recorded with ``version`` (else one more)."""
        with self._lock:
            self.model.load_state_dict(state_dict)
            self.weights_version = version if version is not None else (self.weights_version or 0) + 1

    def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generated:
        import torch

        tok = self.tokenizer
        eos = tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
        greedy = sampling.temperature <= 0
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_tokens, "pad_token_id": pad, "eos_token_id": eos,
                                  "output_logits": True, "return_dict_in_generate": True, "do_sample": not greedy}  # fmt: skip
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        with self._lock, torch.no_grad():
            ids = torch.tensor([prompt_ids])
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        new = out.sequences[0, len(prompt_ids) :].tolist()
        logits = torch.stack(out.logits, dim=1)[0].float()
        if not greedy:
            logits = logits / sampling.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(new).unsqueeze(-1)).squeeze(-1)
        finish = "stop" if new and new[-1] == eos else "length"
        return Generated([int(i) for i in new], [float(x) for x in logprobs.tolist()], finish)
