"""Mathematics only: exact privacy arithmetic, privacy measures and measurements. No I/O."""
