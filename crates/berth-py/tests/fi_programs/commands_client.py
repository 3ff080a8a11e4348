import marshal
from berth.fi import *

"""
FI-ASockIOCore's benchmarking manager client ("Examples And Benchmarks/Commands processing from
manager/BENCHMARKING CLIENT/client.py"), written again the way FI's is written, for berth's
tests: a core with no gates connects to the server as "manager client" (a super-server added
with add_client), sends ITERATIONS marshal-encoded commands in one send_messages_to_client,
counts the answers, then sends the shut-down command and waits for the server to go. FI's timing
helper (performance_test_lib.test_run_time) is replaced by a count. Only the import line differs
between FI and berth.

Usage: python commands_client.py PORT [ITERATIONS] [unix]
"""

MANAGER_CLIENT_KEYWORD = b'manager client'

SERVER_ADDRESS = ('localhost', int(sys.argv[1]))
SERVER_ADDRESS_AF_UNIX = 'server.af_unix.socket'

BSC__ITERATIONS_QNT = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
BSC__DATA = 'hello world'
BSC__COMMAND = ('do', BSC__DATA)
BSC__COMPACT_COMMAND = marshal.dumps(BSC__COMMAND)
BSC__CLOSE_COMMAND = ('server command', 'shut down')
BSC__COMPACT_CLOSE_COMMAND = marshal.dumps(BSC__CLOSE_COMMAND)

BSC__IO_ITERATION_TIMEOUT = 0.5

BSC__USE_UNIX_SOCKET_ON_CLIENT = len(sys.argv) > 3 and sys.argv[3] == 'unix'

BSC__USE_READ_WITH_FIXED_BUFFER = True

BSC__SOCKET_READ_FIXED_BUFFER_SIZE = 1024 ** 2

BSC__USE_NODELAY_INET = True


def run_non_blocking_server_benchmarking_client():
    # CREATE CLIENT
    tcp_app_server = ASockIOCore(set())

    # SET CLIENT SETTINGS
    tcp_app_server.use_nodelay_inet = BSC__USE_NODELAY_INET
    tcp_app_server.use_speed_optimized_socket_read = BSC__USE_READ_WITH_FIXED_BUFFER
    tcp_app_server.socket_read_fixed_buffer_size.result = BSC__SOCKET_READ_FIXED_BUFFER_SIZE

    answers = 0
    wrong = 0
    start = time.perf_counter()

    # START CLIENT
    with asock_io_core_connect(tcp_app_server) as server:
        # REGISTER CONNECTION TO SUPER SERVER
        super_server_tcp_settings = ConnectionSettings(ConnectionDirectionRole.server, SERVER_ADDRESS,
                                                       MANAGER_CLIENT_KEYWORD)
        #   If AF_UNIX is allowed and this is Unix-like os
        if BSC__USE_UNIX_SOCKET_ON_CLIENT:
            if 'posix' == os.name:
                super_server_tcp_settings = ConnectionSettings(ConnectionDirectionRole.server,
                                                               os.path.join(os.getcwd(), SERVER_ADDRESS_AF_UNIX),
                                                               MANAGER_CLIENT_KEYWORD, socket.AF_UNIX,
                                                               socket.SOCK_STREAM)
        super_server_info = Client(super_server_tcp_settings)
        super_server_id = server.add_client(super_server_info)
        super_server_connected = False
        shut_down = False

        # WAITING FOR CONNECTION TO SUPER SERVER
        while not super_server_connected:
            io_iteration_result = server.io_iteration(BSC__IO_ITERATION_TIMEOUT)

            if not super_server_connected:
                if super_server_id in io_iteration_result.newly_connected_expected_clients:
                    super_server_connected = True

        # THIS CLIENT HAS BEEN CONNECTED TO SUPER SERVER
        if super_server_connected:
            try:
                server.send_messages_to_client(
                    super_server_id, [BSC__COMPACT_COMMAND for index in range(BSC__ITERATIONS_QNT)])
            except Exception as err:
                print(err, flush=True)
            left = BSC__ITERATIONS_QNT
            while (not shut_down) and (left > 0):
                io_iteration_result = server.io_iteration(BSC__IO_ITERATION_TIMEOUT)

                if super_server_id in io_iteration_result.clients_with_disconnected_connection:
                    print('Super server has been disconnected - Shut down benchmark client', flush=True)
                    shut_down = True
                    break
                if super_server_id in io_iteration_result.clients_have_data_to_read:
                    for compact_command in server.get_messages_from_client(super_server_id):
                        left -= 1
                        answers += 1
                        if marshal.loads(compact_command) != BSC__DATA.upper():
                            wrong += 1

            # SENDING SHUT DOWN COMMAND TO SUPER SERVER
            if not shut_down:
                server.send_message_to_client(super_server_id, BSC__COMPACT_CLOSE_COMMAND)
                while not shut_down:
                    io_iteration_result = server.io_iteration(BSC__IO_ITERATION_TIMEOUT)

                    if super_server_id in io_iteration_result.clients_with_disconnected_connection:
                        print('Super server has been successfully disconnected - Shut down benchmark client',
                              flush=True)
                        shut_down = True
                        break
    print('ANSWERS: {} WRONG: {} SECONDS: {:.3f}'.format(answers, wrong, time.perf_counter() - start))
    print('Client has been Shut Down.')


if __name__ == '__main__':
    run_non_blocking_server_benchmarking_client()
