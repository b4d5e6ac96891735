module krunbox/agent

go 1.19
