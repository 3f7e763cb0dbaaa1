/*
 * Runs many mqadmin commands in one JVM (a JVM start costs seconds on a small machine).
 *
 * stdin: one command per line, its arguments separated by TAB. For each line, calls
 * org.apache.rocketmq.tools.command.MQAdminStartup.main(args) with System.out/err captured and
 * System.exit trapped, then writes one line to the real stdout:
 *   "@@MQADMIN <exit code or -> <base64 stdout> <base64 stderr>"
 * ("-" when the command returned without calling System.exit). Loaded by reflection, so one
 * class file serves every rocketmq-tools release.
 */
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.security.Permission;
import java.util.Base64;
import java.util.List;

public final class MqadminDriver {
    /** Thrown instead of exiting; an Error, so mqadmin's own catch (Exception) lets it pass. */
    static final class ExitTrapped extends Error {
        final int status;

        ExitTrapped(int status) {
            super("System.exit(" + status + ")");
            this.status = status;
        }
    }

    @SuppressWarnings("removal")
    public static void main(String[] argv) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkPermission(Permission perm) {
            }

            @Override
            public void checkExit(int status) {
                throw new ExitTrapped(status);
            }
        });
        Class<?> startup = Class.forName("org.apache.rocketmq.tools.command.MQAdminStartup");
        Method main = startup.getMethod("main", String[].class);
        // main() appends fresh sub-command objects to a static list on every call and runs the
        // first match: the list is emptied before each command, so no command object (some keep
        // a producer or consumer they shut down) is used twice
        Field commands = null;
        for (Field f : startup.getDeclaredFields()) {
            if (Modifier.isStatic(f.getModifiers()) && List.class.isAssignableFrom(f.getType())) {
                f.setAccessible(true);
                commands = f;
            }
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        realOut.println("@@READY");
        realOut.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] args = line.isEmpty() ? new String[0] : line.split("\t", -1);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            String status = "-";
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            // "@stopAfter=<ms>" as first argument: interrupt the command then (clusterRT
            // repeats until interrupted)
            long stopAfter = 0;
            if (args.length > 0 && args[0].startsWith("@stopAfter=")) {
                stopAfter = Long.parseLong(args[0].substring("@stopAfter=".length()));
                args = java.util.Arrays.copyOfRange(args, 1, args.length);
            }
            final String[] commandArgs = args;
            final Throwable[] thrown = new Throwable[1];
            try {
                if (commands != null) {
                    ((List<?>) commands.get(null)).clear();
                }
                Thread worker = new Thread(() -> {
                    try {
                        main.invoke(null, (Object) commandArgs);
                    } catch (Throwable t) {
                        thrown[0] = t;
                    }
                }, "mqadmin-command");
                worker.start();
                worker.join(stopAfter);
                if (worker.isAlive()) {
                    worker.interrupt();
                    worker.join();
                }
                if (thrown[0] instanceof InvocationTargetException) {
                    throw (InvocationTargetException) thrown[0];
                } else if (thrown[0] != null) {
                    thrown[0].printStackTrace(System.err);
                    status = "uncaught";
                }
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof ExitTrapped) {
                    status = Integer.toString(((ExitTrapped) cause).status);
                } else {
                    cause.printStackTrace(System.err);
                    status = "uncaught";
                }
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            Base64.Encoder b64 = Base64.getEncoder();
            realOut.println("@@MQADMIN " + status + " " + b64.encodeToString(out.toByteArray()) + " "
                + b64.encodeToString(err.toByteArray()));
            realOut.flush();
        }
    }
}
