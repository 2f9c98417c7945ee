"""What a person looks at: a case's timeline, the HTML report."""
