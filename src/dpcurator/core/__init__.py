"""Mathematics only: exact privacy arithmetic and privacy measures. No I/O."""
