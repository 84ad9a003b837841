"""Running episodes: the one episode driver (:mod:`~.driver`, token mode in :mod:`~.tokens`), the env pool
(:mod:`~.pool`), engines (:mod:`~.engines`: asyncio, processes, Ray), policies (:mod:`~.policies`), GRPO groups
(:mod:`~.groups`), sinks (:mod:`~.sinks`), and the entry points over them (:mod:`~.collect`, :mod:`~.stream`,
:mod:`~.text_episode` for trainers that step an episode from outside)."""
