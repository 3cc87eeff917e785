"""``rewrite batch``: the manifest, the local process pool, and Ray."""
