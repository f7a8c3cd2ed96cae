"""Built-in example programs that `hlo-tools dump` and `report` compile by name."""
