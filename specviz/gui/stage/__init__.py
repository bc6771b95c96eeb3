"""Made for the stage: the race and its window, the step measured at load, exports for slides."""
