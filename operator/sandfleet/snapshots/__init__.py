"""Where suspended cluster sessions' files live while they hold no pod.

`store` is the seam (the SnapshotStore protocol, keys, what a stored snapshot is);
`volume` keeps snapshots as files on a mounted volume (a PersistentVolumeClaim in the
chart); other stores (S3-compatible object storage) implement the same protocol.
"""
