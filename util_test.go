package distlock_test

import "strconv"

func atoi(s string) (int, error) { return strconv.Atoi(s) }

func itoa(i int) string { return strconv.Itoa(i) }
