"""The agent's tools over every server of an env: a server's tool list read defensively (:mod:`~.listing`), one
namespace of names and schemas (:mod:`~.namespace`), the checks on a call's arguments before it is sent
(:mod:`~.arguments`, :mod:`~.validate`), sending it and turning every ending into a result (:mod:`~.calls`), and the
bound on a step's calls (:mod:`~.guard`)."""
