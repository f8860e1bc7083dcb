"""Results for people and CI systems: the HTML report and JUnit XML."""
