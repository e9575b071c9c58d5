"""evalpipe: score a Parquet corpus with an evaluation service, as fast as the account's limits
allow and never faster, one output row per input row, exactly once."""
