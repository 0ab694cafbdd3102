"""Plain helpers the test modules share; fixtures stay in the conftest files.

``proxy``: the real proxy on a loopback port and the config tree it runs;
``processes``: ``python main.py`` and other child processes;
``answers``: reply texts that steer the speculative pipeline, and readers of its responses;
``local_server``: the stand-in llama-server binary and tiny GGUF files;
``fake_upstream``: a queue-backed ``Upstream`` (``enqueue()``, ``history``) for unit
tests of the pipeline without sockets.
No test module imports another test module: what two of them need lives here.
"""
