"""Who is asking: bots, the device profiles they are served, crawler families, the client's
address, and the verification of a crawler's claim (verification/)."""
