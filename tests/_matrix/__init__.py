"""What the two framework matrices share: ``tests/frameworks`` (Python set-ups, one cached
virtualenv per requirements file) and ``tests/frameworks_js`` (JavaScript set-ups, one
cached ``npm ci`` tree per framework directory, run through the Collector and serve).

- :mod:`.rows`: the scenarios, the ``setups.toml`` format and the README's "Works with" rows;
- :mod:`.builds`: cache directories, their keys, one locked build per key, ``prebuild``;
- :mod:`.runs`: an agent run's environment and process;
- :mod:`.cli`: the harnesses' command line;
- :mod:`.testing`: the pytest side (parameters, skip or fail when a build cannot be had).

Everything but :mod:`.testing` is standard library only: the Python matrix's ``prebuild``
runs before the package and its test dependencies are installed. Each matrix keeps what
differs (its ``Setup`` fields, how a tree is built and keyed, how a run is judged).
"""
