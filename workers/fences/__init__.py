"""Every use of another library's private code, one module per library, each checking the version it was read from."""
