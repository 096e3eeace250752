"""SGLang patches: one folder per upstream change (see each folder's ``__init__``).

``_common`` holds the small helpers every folder uses (module lookup, ``require``, feature
lookups); everything that implements one upstream change lives in that change's folder.
"""
