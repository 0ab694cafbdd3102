"""Learning the spill decision from the labels the proxy's own verifications produce."""
