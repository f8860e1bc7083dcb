"""Model files: lines checked, loaded by the C libraries; the recommended model saved."""
