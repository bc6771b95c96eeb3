"""The windows: the main window and its panels, the explore window, the glossary, start-up."""
