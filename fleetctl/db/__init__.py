"""SQLModel tables and the queries over them. No business rules live here."""
