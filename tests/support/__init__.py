"""Test support code shared across test layers (real servers, fixtures helpers)."""
