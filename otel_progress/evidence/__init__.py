"""Evidence: what a tool call's request and result say, and whether the result is new.

The engine's signals compare digests; the modules here answer what a digest cannot, one
question each:

* :mod:`.canonical`: canonical forms and digests of arguments, results and errors (two
  values that mean the same thing give one digest).
* :mod:`.content`: whether a result is empty, says "nothing found", or repeats one the run
  already had (token sets, near-duplicate sketches).
* :mod:`.opaque`: opaque tokens in plain text (request ids, hex and base64 blobs).
* :mod:`.volatile`: volatile tokens in plain text (temporary paths, addresses, times,
  durations) and a run's memory of its tools' recent answers, to tell an answer that
  differs from an earlier one only in them.
* :mod:`.generic`: messages and answers that carry no information about what happened.
* :mod:`.location`: the place (page, file, record) a request or result names.
* :mod:`.views`: answers at one location compared as looks at one thing.

Nothing here imports the engine or an adapter.
"""
