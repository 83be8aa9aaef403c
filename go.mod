module github.com/distlock/distlock

go 1.26
