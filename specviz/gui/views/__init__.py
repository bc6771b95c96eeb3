"""What draws a run: the token stream, the p/q bars, the acceptance and speed plots, staged
rounds."""
