"""How it looks: palette and fonts, themes, zoom."""
