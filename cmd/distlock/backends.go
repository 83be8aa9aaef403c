package main

// The backends built into the command.
import (
	_ "github.com/distlock/distlock/etcd"
	_ "github.com/distlock/distlock/file"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/mysql"
	_ "github.com/distlock/distlock/postgres"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zookeeper"
)
