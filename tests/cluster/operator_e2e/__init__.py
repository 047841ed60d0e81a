"""End-to-end tests of the operator (a package, so its operator fixture ends with it)."""
