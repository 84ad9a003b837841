"""How an env reaches its servers: one live session per server (:mod:`~.connection`), over our bounded stdio
(:mod:`~.stdio`, :mod:`~.pipes`, :mod:`~.lines`, :mod:`~.errlog`, :mod:`~.proctree`) and streamable-HTTP
(:mod:`~.http`) transports, the protocol era each server speaks (:mod:`~.discover`), what a transport tells its
connection across restarts (:mod:`~.replies`), and what the envs of one process share (:mod:`~.pool`: sessions and
processes per event loop; :mod:`~.shared`: a local server process refcounted across envs)."""
