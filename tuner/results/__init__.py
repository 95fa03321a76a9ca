"""What a study gives back: the recommendation, datasets (JSON Lines), parameter importances and
the reports drawn from them."""
