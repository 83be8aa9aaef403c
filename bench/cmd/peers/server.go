package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

type server struct {
	addr string
	cmd  *exec.Cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts a private redis-server on a free loopback port, with
// extra arguments appended; it dies with this process (PDEATHSIG) and is
// killed by stop.
func startRedis(bin string, extra ...string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--bind", "127.0.0.1", "--dir", "/tmp", "--loglevel", "warning"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil && line == "+PONG\r\n" {
				return s, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING", s.addr)
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
}
