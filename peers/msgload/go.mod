module berth-msgload

go 1.21
