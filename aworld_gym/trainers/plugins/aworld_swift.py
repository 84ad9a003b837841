"""ms-swift plugin: ``--external_plugins <this file>`` registers the AWorld faces (see aworld_gym.trainers.swift):
``--multi_turn_scheduler aworld`` / ``aworld_openenv``, ``--gym_env aworld`` and ``--reward_funcs aworld``.
Its path: ``python -c "from aworld_gym.trainers.plugins import SWIFT; print(SWIFT)"``."""

import aworld_gym.trainers.swift  # noqa: F401 - the registrations run on import
