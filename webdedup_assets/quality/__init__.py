"""What a user asks of a finished corpus, reading only: evaluate (recall and precision against an
exact reference or labels), tune (the banding for a target recall), explain and inspect (why two
pages are or are not duplicates; a cluster's members)."""
