module github.com/linemq/linemq

go 1.26
