"""HFPolicy: a local transformers causal LM as a policy (sampled token ids and logprobs kept)."""

from __future__ import annotations

import threading
from typing import Any

from aworld_gym.base.errors import ConfigError
from aworld_gym.core.actions import Action, Sample
from aworld_gym.core.episode import require_text
from aworld_gym.rollout.policies import ContextLimit


class HFPolicy:
    """Generates each action with ``model.generate`` on the env's chat history (the tokenizer's chat template).

    Args:
        model: a local checkpoint folder (or an already loaded model, with ``tokenizer``).
        tokenizer: a tokenizer, when ``model`` is an object.
        max_new_tokens, temperature, top_p, top_k: sampling settings (``temperature=0``: greedy).
        device: where to run (default: CUDA if available, else CPU).
        max_model_len: the model's context (default: its config's ``max_position_embeddings``): a turn whose prompt
            plus ``max_new_tokens`` would not fit ends the episode with ``context_limit`` instead of generating.
        overflow_reward: the reward component ``context_limit`` added when that happens.
    """

    name = "hf"

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        *,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        device: str | None = None,
        latency_s: float = 0.0,
        base_url: str | None = None,
        max_model_len: int | None = None,
        overflow_reward: float = 0.0,
    ) -> None:
        if model is None:
            raise ConfigError("the hf policy needs --model: a local checkpoint folder")
        self.model_ref, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p, self.top_k = max_new_tokens, temperature, top_p, top_k
        self.device = device
        self.max_model_len, self.overflow_reward = max_model_len, overflow_reward
        self._model: Any = None
        self._lock = threading.Lock()
        self.version = 0  # the weights' version, recorded with every sample (bump it when the weights change)

    def _load(self) -> Any:
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            if isinstance(self.model_ref, str):
                self.tokenizer = self.tokenizer or AutoTokenizer.from_pretrained(self.model_ref)
                self._model = AutoModelForCausalLM.from_pretrained(self.model_ref)
            else:
                self._model = self.model_ref
            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._model.to(device).eval()
        return self._model

    @property
    def context_limit(self) -> Any:
        """The episode driver's context check (the prompt counted with this model's chat template)."""
        model = self._load()
        limit = self.max_model_len or getattr(model.config, "max_position_embeddings", None)
        if limit is None:
            return None
        tok = self.tokenizer

        def count(messages: list[dict[str, Any]]) -> int:
            out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
            return len(out["input_ids"])

        return ContextLimit(int(limit), self.max_new_tokens, count, self.overflow_reward)

    def load_weights(self, state_dict: dict[str, Any], version: int | None = None) -> None:
        """Replace the sampling model's weights (e.g. from a learner) between generations; bump the version."""
        with self._lock:
            self._load().load_state_dict(state_dict)
            self.version = self.version + 1 if version is None else version

    def act(self, env: Any, observation: str, info: dict[str, Any]) -> Action:
        import torch

        require_text(env.messages, "HFPolicy (a text chat template)")
        with self._lock:  # one generate at a time per model
            model = self._load()
            tok = self.tokenizer
            prompt = tok.apply_chat_template(env.messages, add_generation_prompt=True, return_tensors="pt",
                                             return_dict=True)  # fmt: skip
            ids = prompt["input_ids"].to(model.device)
            do_sample = self.temperature > 0
            with torch.no_grad():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=prompt["attention_mask"].to(model.device),
                    max_new_tokens=self.max_new_tokens,
                    do_sample=do_sample,
                    temperature=self.temperature if do_sample else None,
                    top_p=self.top_p if do_sample else None,
                    top_k=self.top_k if do_sample else None,
                    output_scores=True,
                    return_dict_in_generate=True,
                    pad_token_id=tok.pad_token_id,
                    eos_token_id=tok.eos_token_id,
                )
            new = out.sequences[0, ids.shape[1] :]
            logprobs = []
            for step, token in enumerate(new.tolist()):
                scores = torch.log_softmax(out.scores[step][0].float(), dim=-1)
                logprobs.append(float(scores[token]))
            token_ids = new.tolist()
            text_ids = token_ids[:-1] if token_ids and token_ids[-1] == tok.eos_token_id else token_ids
            cut = text_ids == token_ids and len(token_ids) >= self.max_new_tokens  # no end-of-turn: cut off
            sample = Sample(token_ids=token_ids, logprobs=logprobs, prompt_ids=ids[0].tolist(),
                            model_version=self.version, finish_reason="length" if cut else "stop")  # fmt: skip
            return Action(tok.decode(text_ids, skip_special_tokens=False), sample=sample)
