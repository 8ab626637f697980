"""The only Python wing that knows Redis: client, scripts, claims, and each shared filter."""
