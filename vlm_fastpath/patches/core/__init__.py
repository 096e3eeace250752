"""The patch machinery: what a patch is (``base``), which folders hold them (``catalog``), how
the registry decides (``decisions``), stacks and reverts them (``stacks``), reports them
(``status``), contains their run-time faults (``containment``), and which releases the sweep
verified (``fingerprint``, ``verified.json``). Imports no engine."""
