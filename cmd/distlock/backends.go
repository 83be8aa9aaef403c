package main

// The backends built into the command.
import (
	_ "github.com/distlock/distlock/memory"
)
