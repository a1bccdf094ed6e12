// Hadoop's own client tools, as a job's user runs them (hdfs.sh put, fetchdt):
//   Client put LOCAL_DIR URL        `hdfs dfs -put`
//   Client fetchdt [ARGS] FILE      `hdfs fetchdt` (a delegation token file)
// The configuration comes from the classpath (hdfs.sh puts HADOOP_CONF_DIR first).
// On a Kerberized cluster the user logs in from the keytab SLUICE_KEYTAB as
// SLUICE_PRINCIPAL when both are set, else from the ticket cache.
package sluice.minidfs;

import java.security.PrivilegedExceptionAction;
import java.util.Arrays;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FsShell;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.tools.DelegationTokenFetcher;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.ToolRunner;

public final class Client {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            throw new IllegalArgumentException("usage: Client put LOCAL_DIR URL | fetchdt [ARGS] FILE");
        }
        Configuration conf = new HdfsConfiguration();
        UserGroupInformation.setConfiguration(conf);
        String keytab = System.getenv("SLUICE_KEYTAB");
        String principal = System.getenv("SLUICE_PRINCIPAL");
        UserGroupInformation ugi =
            UserGroupInformation.isSecurityEnabled() && keytab != null && principal != null
                ? UserGroupInformation.loginUserFromKeytabAndReturnUGI(principal, keytab)
                : UserGroupInformation.getCurrentUser();
        String[] rest = Arrays.copyOfRange(args, 1, args.length);
        int code = ugi.doAs((PrivilegedExceptionAction<Integer>) () -> {
            switch (args[0]) {
                case "put": {
                    String[] put = new String[rest.length + 1];
                    put[0] = "-put";
                    System.arraycopy(rest, 0, put, 1, rest.length);
                    return ToolRunner.run(conf, new FsShell(conf), put);
                }
                case "fetchdt":
                    DelegationTokenFetcher.main(conf, rest);
                    return 0;
                default:
                    throw new IllegalArgumentException("unknown tool " + args[0]);
            }
        });
        System.exit(code);
    }

    private Client() {}
}
