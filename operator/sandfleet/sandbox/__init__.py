"""The SDK's sandbox: the public Sandbox and its blocking twin SyncSandbox (facade, sync), the
core they share (core), the interface every backend implements (backend), tree snapshots and
copy-back. Import the public names from `sandfleet`; these modules are internal."""
